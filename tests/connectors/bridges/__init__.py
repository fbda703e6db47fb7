"""Tests of the incident bridges: each endpoint against a local receiver."""
