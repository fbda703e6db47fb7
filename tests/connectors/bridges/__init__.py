"""Tests of the incident bridges: each endpoint against a receiver that checks its format."""
