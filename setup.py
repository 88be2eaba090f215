"""Maps the top-level `proto/` and `services/` folders into the `flawforge` namespace."""
from setuptools import find_packages, setup

MAPPED = {"flawforge.proto": "proto", "flawforge.services": "services"}

packages = find_packages(include=["flawforge", "flawforge.*"])
for name, folder in MAPPED.items():
    packages += [name + sub[len(folder):] for sub in find_packages(include=[folder, folder + ".*"])]

setup(
    packages=packages,
    package_dir=MAPPED,
    package_data={"": ["*.html", "*.js", "*.css", "*.json", "*.yaml", "static/*"]},
)
