"""Stream processing: the pure correlation core (``streams.core``) and its configuration.

Importing this package first checks that a compiled core, if one is built, was built
from the sources beside it (:func:`streams.native.guard`); else the sources run.
"""

from streams.native import guard

guard()
