"""Lightning's ``AcceleratorRegistry`` and ``StrategyRegistry`` under ``python -m trainer.as_lightning``.

Libraries register their own accelerators and strategies when they are imported (anomalib's
``XPUAccelerator`` and ``SingleXPUStrategy``), so the registries must exist for the library to import.
They keep what is registered, as Lightning's do; the Trainer runs the kinds Lockstep has
(``accelerator="cpu"`` / ``"cuda"``, its strategies) and refuses another name, naming the ones it takes.
"""
from __future__ import annotations

from typing import Any, Callable, Optional


class _Registry(dict):  # type: ignore[type-arg]
    """Name -> ``{"description", "init_params", <kind>, <kind>_name}``, as Lightning's registries hold them."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self._kind = kind

    def register(self, name: str, obj: Optional[Callable[..., Any]] = None, description: str = "",
                 override: bool = False, **init_params: Any) -> Callable[..., Any]:
        """Register ``obj`` under ``name`` (or, without ``obj``, return a decorator that does)."""
        if not isinstance(name, str):
            raise TypeError(f"`name` must be a str, found {name}")
        if name in self and not override:
            raise ValueError(f"'{name}' is already present in the registry. HINT: Use `override=True`.")

        def do_register(registered: Callable[..., Any]) -> Callable[..., Any]:
            self[name] = {"description": description, "init_params": init_params, self._kind: registered,
                          f"{self._kind}_name": name}
            return registered

        return do_register(obj) if obj is not None else do_register

    def get(self, name: str, default: Optional[Any] = None) -> Any:
        """A new instance of what ``name`` registered, with its ``init_params``; else ``default``."""
        if name in self:
            data = self[name]
            return data[self._kind](**data["init_params"])
        if default is not None:
            return default
        raise KeyError(f"{self._kind.capitalize()} with name '{name}' is not registered; available: {sorted(self)}")

    def remove(self, name: str) -> None:
        """Forget ``name``."""
        self.pop(name)

    def names(self) -> list[str]:
        """The registered names."""
        return list(self)


AcceleratorRegistry = _Registry("accelerator")
StrategyRegistry = _Registry("strategy")
