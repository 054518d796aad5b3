#!/usr/bin/env python
import os
import sys


def main():
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "takeover.settings")
    from takeover.embedded_db import prepare

    prepare(stop_at_exit=True)  # a one-off command stops the server it started
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
