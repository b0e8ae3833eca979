"""Shared test infrastructure (throwaway PostgreSQL server, pytest plugins)."""
