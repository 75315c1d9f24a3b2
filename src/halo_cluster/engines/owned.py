"""The options an engine's command line takes from halo, as a mapping looked up the way the
engine's own parser reads an argument (pure): a key is any argument that sets one of them,
iterating gives their spellings, and the value says which halo option sets it. Each engine
says how its parser reads an argument (``option``); ``engines.request.refuse_owned`` asks."""

from __future__ import annotations

from collections.abc import Iterator, Mapping


class OwnedOptions(Mapping[str, str]):
    def __init__(self, options: Mapping[str, str]) -> None:
        self._options = dict(options)

    def __getitem__(self, arg: str) -> str:
        option = self.option(arg)
        if option is None:
            raise KeyError(arg)
        return self._options[option]

    def __iter__(self) -> Iterator[str]:
        return iter(self._options)

    def __len__(self) -> int:
        return len(self._options)

    def option(self, arg: str) -> str | None:
        """The spelling of halo's option that ``arg`` sets, or None (whole spellings only:
        an engine whose parser reads more says so)."""
        key = arg.split("=", 1)[0]
        return key if key in self._options else None
