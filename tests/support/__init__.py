"""Code the tests share that needs the development extra: a local S3-API server, certificates.

Imported as `tests.support.<module>` (pytest puts the repository root on the path).
"""
