#!/usr/bin/env bash
# Debian's fonts-wqy-microhei: a font with the Chinese glyphs for invoice PDFs in zh-CN
# (docs/customers.md). Installs it when missing; prints its path.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
FONT=/usr/share/fonts/truetype/wqy/wqy-microhei.ttc
apt_ensure "$FONT" fonts-wqy-microhei
echo "$FONT"
