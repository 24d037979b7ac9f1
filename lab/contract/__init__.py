"""The contract wing: what a run promises its readers (metrics, reasons, options, notes, profiles, the results and
manifest schema). Imports nothing but the standard library, pydantic and lab's utilities."""
