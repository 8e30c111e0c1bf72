"""Address and queue names (Artemis ``CompositeAddress``, ``WildcardConfiguration``): what a
name may be, routing prefixes and fully qualified queue names (``names``), and the wildcard
grammar that address settings and wildcard addresses match by (``wildcards``).

May import: the engine's base modules (``errors``, ``values``, ``model``) only.
"""
