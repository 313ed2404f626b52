"""Project-wide utilities that every layer may import.
"""
