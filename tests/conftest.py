import pytest


def pytest_addoption(parser):
    parser.addoption(
        "--update-fixtures",
        action="store_true",
        default=False,
        help="rewrite fixtures/*/expected.py from the current engine (review the diff before committing)",
    )


@pytest.fixture
def update_fixtures(request):
    return request.config.getoption("--update-fixtures")
