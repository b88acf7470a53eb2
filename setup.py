"""Metadata and options are in setup.cfg; this adds the one C extension, optional so that an
install without a C compiler still works (the Python path then serves every call: see
hpccoll/runtime/entry.py)."""
from setuptools import Extension, setup

setup(ext_modules=[Extension("hpccoll.runtime._entry", ["hpccoll/runtime/_entry.c"],
                             optional=True)])
