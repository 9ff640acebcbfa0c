"""xformers, provided by transfer (see transfer/dropins/__init__.py): the
``xformers.ops`` attention API on torch's scaled_dot_product_attention."""

__version__ = "0.0.29.post3"
