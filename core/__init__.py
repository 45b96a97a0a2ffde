"""The ground floor: what every stage stands on (recipe schema, hashing, atomic file writers, the stage cache).

Nothing in core/ imports project code outside core/."""
