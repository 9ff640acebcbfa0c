"""Tool migration, offline: `scan` reports, `port` rewrites, `docs` renders.

Everything here reads Python sources as text and the support table
(`transfer.support`); it never imports torch nor `transfer.patches`, so it runs
on a laptop without torch (the migrate tests check sys.modules).
"""
