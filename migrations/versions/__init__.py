"""Migration scripts, applied in order of their `down_revision` chain."""
