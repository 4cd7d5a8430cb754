"""HTTP front door: thin Falcon resources over the services."""
