# python/: the ctypes binding, installed as a plain module (no compile step).
pkgpythondir = $(datadir)/tessera/python
dist_pkgpython_DATA = python/tessera.py
