"""Generators for the shipped demo tasks (code, math, extraction) and their training data."""

from demo.tasks import code_gen, extraction_gen, math_gen

GENERATORS = {"demo_code": code_gen, "demo_math": math_gen, "demo_extraction": extraction_gen}
