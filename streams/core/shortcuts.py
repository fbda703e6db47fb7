"""The switch of the hot path's shortcuts, for the differential tests.

A shortcut skips work a rule would find to change nothing; the full path
is the reference. ``tests/streams/core/test_differential.py`` runs the same streams with
:data:`ENABLED` false and compares every incident byte for byte.

Why a module attribute and not a patched function: the compiled core
(:mod:`schemas.native`) binds calls between its modules at build time, so replacing a
function from a test changes nothing there. This module is not compiled, and the rules
read the attribute through it at run time. Never switch it off in production: the
result is the same, only slower.
"""

ENABLED = True
