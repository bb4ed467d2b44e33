"""The ground floor: what the upper floors agree on, importing only the standard library and torch.

The protocols of what a callback may read and call on the Trainer and the module, the hook names,
the error types, the argument checks, the rank detection and the storage layer. Nothing here
imports another part of `trainer` or `callbacks`, so every part can import it.
"""
