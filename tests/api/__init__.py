"""Tests of the HTTP service (api/)."""
