"""The public API: what ``queuey_core`` exports."""

from __future__ import annotations

import importlib
import subprocess
import sys

import queuey_core
from queuey_core import errors


def test_all_is_sorted_and_everything_in_it_imports() -> None:
    assert queuey_core.__all__ == sorted(queuey_core.__all__)
    module = importlib.import_module("queuey_core")
    for name in queuey_core.__all__:
        assert getattr(module, name) is not None, name


def test_every_error_derives_from_one_of_the_two_roots() -> None:
    for name in dir(errors):
        obj = getattr(errors, name)
        if (
            isinstance(obj, type)
            and issubclass(obj, BaseException)
            and obj.__module__ == errors.__name__
        ):
            assert (
                issubclass(obj, (errors.QueueyError, errors.JobError)) or obj is errors.JobTimeout
            ), name


def test_importing_the_library_does_not_import_pika() -> None:
    code = "import sys, queuey_core; sys.exit('pika' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_rabbitmq_backend_is_exported_but_pika_comes_only_with_its_first_use() -> None:
    code = (
        "import sys, queuey_core\n"
        "assert 'pika' not in sys.modules, 'import queuey_core imported pika'\n"
        "assert 'RabbitMQBackend' in queuey_core.__all__\n"
        "from queuey_core import RabbitMQBackend\n"
        "from queuey_core.backends.rabbitmq import RabbitMQBackend as real\n"
        "assert RabbitMQBackend is real, RabbitMQBackend\n"
        "assert 'pika' in sys.modules, 'the backend runs on pika'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True)
    assert result.returncode == 0, result.stderr.decode()
