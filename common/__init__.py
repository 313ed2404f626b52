"""Project-wide utilities that every layer may import, and that import nothing of the project:
time sources (clock), background services (service), one-shot results (completion), failpoints,
CRC-32C, a GIL-friendly lock, child-process pipe frames and text tables for people.
"""
