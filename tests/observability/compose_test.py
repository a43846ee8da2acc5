#!/usr/bin/env python3
"""What can be checked of docker-compose.yml and the Dockerfile without a
Docker engine: start order and health checks, that Prometheus scrapes the
port the consumers serve, that every mounted file exists, and that the
runtime image installs the package of every library the binary links.

Usage: compose_test.py --cli build/sqlgroup --source .
"""
import argparse
import os
import re
import subprocess
import sys
import unittest

import yaml

ARGS = None
# Packages every debian:12-slim image already has.
BASE_PACKAGES = {"libc6", "libstdc++6", "libgcc-s1"}


class ComposeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(os.path.join(ARGS.source, "docker-compose.yml")) as f:
            cls.compose = yaml.safe_load(f)
        cls.services = cls.compose["services"]
        with open(os.path.join(ARGS.source, "Dockerfile")) as f:
            cls.dockerfile = f.read()

    def test_every_dependency_waits_for_a_healthy_or_finished_service(self):
        for name, svc in self.services.items():
            for dep, cond in (svc.get("depends_on") or {}).items():
                self.assertIn(dep, self.services, name)
                if cond["condition"] == "service_healthy":
                    self.assertIn("healthcheck", self.services[dep], dep)
        self.assertEqual(
            self.services["consumer"]["depends_on"]["migrate"]["condition"],
            "service_completed_successfully")

    def test_consumers_scale_and_prometheus_scrapes_their_port(self):
        consumer = self.services["consumer"]
        self.assertNotIn("container_name", consumer)  # --scale needs that
        self.assertNotIn("ports", consumer)
        command = consumer["command"]
        addr = command[command.index("--metrics_addr") + 1]
        with open(os.path.join(ARGS.source, "dashboards", "prometheus.yml")) as f:
            prom = yaml.safe_load(f)
        sd = prom["scrape_configs"][0]["dns_sd_configs"][0]
        self.assertEqual(sd["names"], ["consumer"])
        self.assertEqual(str(sd["port"]), addr.rsplit(":", 1)[1])

    def test_every_mounted_file_exists(self):
        for name, svc in self.services.items():
            for volume in svc.get("volumes", []):
                source = volume.split(":")[0]
                if source.startswith("./"):
                    self.assertTrue(
                        os.path.exists(os.path.join(ARGS.source, source)),
                        "%s mounts missing %s" % (name, source))

    def test_the_runtime_image_has_the_package_of_every_linked_library(self):
        runtime = self.dockerfile.split("FROM debian:12-slim", 1)[1]
        installed = set(re.findall(r"\b(lib[\w.+-]+)", runtime))
        needed = subprocess.run(["readelf", "-d", ARGS.cli], check=True,
                                capture_output=True, text=True).stdout
        ldd = subprocess.run(["ldd", ARGS.cli], check=True,
                             capture_output=True, text=True).stdout
        paths = dict(re.findall(r"^\s*(\S+) => (\S+)", ldd, re.M))
        for lib in re.findall(r"\(NEEDED\)\s+Shared library: \[(.+)\]", needed):
            if lib.startswith("ld-linux"):
                continue  # the dynamic loader, part of libc6
            owner = self.package_of(paths[lib])
            self.assertTrue(owner in installed or owner in BASE_PACKAGES,
                            "%s (from %s) is not installed in the runtime "
                            "image" % (owner, lib))

    @staticmethod
    def package_of(path):
        # Debian 12 merges /lib into /usr/lib, but dpkg knows one spelling.
        real = os.path.realpath(path)
        for candidate in (path, real, real.replace("/usr/lib/", "/lib/", 1)):
            r = subprocess.run(["dpkg", "-S", candidate], capture_output=True,
                               text=True)
            if r.returncode == 0:
                return r.stdout.split(":")[0]
        return "(no package owns %s)" % path

    def test_the_build_stage_installs_what_the_setup_script_builds_with(self):
        with open(os.path.join(ARGS.source, "scripts", "setup.sh")) as f:
            setup = f.read()
        build = self.dockerfile.split("FROM debian:12-slim", 1)[0]
        for pkg in ("libpqxx-dev", "libabsl-dev", "prometheus-cpp-dev",
                    "libspdlog-dev", "libfmt-dev", "libpq-dev",
                    "libcurl4-openssl-dev"):
            self.assertIn(pkg, setup)
            self.assertIn(pkg, build)


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--cli", required=True)
    parser.add_argument("--source", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0], "-v"] + rest)


if __name__ == "__main__":
    main()
