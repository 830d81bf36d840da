# python/: the ctypes binding, installed as a plain package (no compile step).
tsrpythondir = $(datadir)/tessera/python/tessera
dist_tsrpython_DATA = python/tessera/__init__.py python/tessera/methods.py \
	python/tessera/diffusers.py python/tessera/distributed.py python/tessera/produce.py
