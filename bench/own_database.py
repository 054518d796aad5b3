"""The commands of `make bench` and `make soak` measure in a database of their own: run
plainly, each runs itself again there with `--inner`, handing on the options it was given."""

from django.core.management.base import BaseCommand


def _option(name: str) -> str:
    return f"--{name.replace('_', '-')}"


class InOwnDatabase(BaseCommand):
    """A measurement in a database of its own. Its options are declared as data, once:
    `knobs` (a number or a text: its default, whose type it takes), `choices` (the first is the
    default) and `switches`, each with its `helps` when it has one. Run plainly, `outer`
    starts `manage.py <command> --inner` in that database with `argv`, every declared
    option as it was given; there `inner(**options)` measures."""

    knobs: dict[str, int | float] = {}
    choices: dict[str, list[str]] = {}
    switches: tuple[str, ...] = ()
    helps: dict[str, str] = {}

    def add_arguments(self, parser):
        for name, default in self.knobs.items():
            parser.add_argument(
                _option(name), type=type(default), default=default, help=self.helps.get(name)
            )
        for name, values in self.choices.items():
            parser.add_argument(_option(name), choices=values, default=values[0])
        for name in self.switches:
            parser.add_argument(_option(name), action="store_true", help=self.helps.get(name))
        self.more_arguments(parser)
        parser.add_argument(
            "--inner", action="store_true", help=self.helps.get("inner", "internal")
        )

    def more_arguments(self, parser):
        """Options the outer command keeps to itself."""

    def handle(self, *args, **opts):
        if opts["inner"]:
            return self.inner(**opts)
        argv = [f"{_option(name)}={opts[name]}" for name in [*self.knobs, *self.choices]]
        argv += [_option(name) for name in self.switches if opts[name]]
        return self.outer(argv, **opts)

    def outer(self, argv: list[str], **opts):
        raise NotImplementedError

    def inner(self, **opts):
        raise NotImplementedError
