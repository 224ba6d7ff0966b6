from crux.optim.soap import scale_by_soap, soap

__all__ = ["scale_by_soap", "soap"]
