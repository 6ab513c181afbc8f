"""cookiecutter's side of the template (`sam init --location template`).

The project's files are shared with cargo-generate, whose Liquid names a
variable `project_name`; cookiecutter's Jinja names it
`cookiecutter.project_name`. This extension lets Jinja find a name that is
not a variable of the template among cookiecutter's, so one set of files
renders alike with both tools (make test generates a project with each and
compares them).
"""

from jinja2.ext import Extension
from jinja2.runtime import Context, missing


class _Context(Context):
    def resolve_or_missing(self, key):
        value = super().resolve_or_missing(key)
        if value is missing:
            variables = super().resolve_or_missing("cookiecutter")
            if isinstance(variables, dict) and key in variables:
                return variables[key]
        return value


class TopLevelVariables(Extension):
    """`{{project_name}}` is `{{cookiecutter.project_name}}`, and so on."""

    def __init__(self, environment):
        super().__init__(environment)
        environment.context_class = _Context
