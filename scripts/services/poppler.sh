#!/usr/bin/env bash
# Debian's poppler-utils: `pdftotext` reads back the invoice PDFs in the tests (docs/invoices.md).
# Installs it when missing; prints its path.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
apt_ensure pdftotext poppler-utils
command -v pdftotext
