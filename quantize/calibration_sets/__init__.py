"""Shipped calibration texts (data only): the sources "stdlib-code" and "stdlib-prose" (README.md here)."""
