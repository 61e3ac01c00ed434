"""The entry names a module attribute that is not a function."""

make = {"model": "not a function"}  # LINE-MARK: not_callable.attr
