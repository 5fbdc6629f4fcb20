# The driver image used by docker-compose.yml (`billing worker`, `billing serve`, `billing gateway-sim`).
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY driver ./driver
COPY db ./db
RUN pip install --no-cache-dir -e .
ENV BILLING_DB_DIR=/app/db
ENTRYPOINT ["billing"]
