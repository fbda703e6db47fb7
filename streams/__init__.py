"""Stream processing: the pure correlation core (``streams.core``) and its configuration.

Importing this package first checks that the compiled modules, if built, were built
from the sources beside them (:func:`schemas.native.guard`, which ``schemas`` already
runs on its own import: the connectors import the compiled router without this
package); else the sources run.
"""

from schemas.native import guard

guard()
