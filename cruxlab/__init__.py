"""The lab around crux: the pipeline that runs experiments on the library and judges its claims; the library,
``crux``, imports none of it."""
