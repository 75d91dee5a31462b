"""rcoll: resilient collective communication.

The PyTorch backend lives in :mod:`rcoll.torch`; importing it registers the
``"rcoll"`` backend with ``torch.distributed``.
"""
