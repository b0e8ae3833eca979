"""GraphQL types of SPEC §7, one module per family; they map core results, nothing more."""
