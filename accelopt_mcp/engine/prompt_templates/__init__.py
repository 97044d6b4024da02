"""Prompt templates, one directory per backend family (cpu, nki, gpu); {{name}} placeholders."""
