# python/: the ctypes binding, installed as a plain module (no compile step).
tsrpythondir = $(datadir)/tessera/python
dist_tsrpython_DATA = python/tessera.py
