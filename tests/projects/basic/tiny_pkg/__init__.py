"""A package inside the project, loaded by the module-path entry `tiny_pkg.nets:make`."""
