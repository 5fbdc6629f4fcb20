#!/usr/bin/env bash
# Debian's Chromium and its WebDriver, for the console's browser tests (driver/tests/test_console_browser.py).
# Installs them when missing (browsers cannot be downloaded by Selenium here); prints the driver's path.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
apt_ensure chromium chromium
apt_ensure chromedriver chromium-driver
command -v chromedriver
