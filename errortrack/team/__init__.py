"""Users and the team: the primary user, global roles."""
