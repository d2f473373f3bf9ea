"""Static analyses: code read, never run (the spawn guard's reading of scripts and notebooks)."""
