"""Local HTTP receivers that validate a vendor's published format, for the bridge tests."""
