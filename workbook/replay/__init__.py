"""Recordings: fixtures (load, check, trust), replaying them through the SDK, recording new ones."""
