"""Tests of the bridge application: the runner, its ledger, storms, settings and process."""
