FROM python:3.12-slim-bookworm
# PySpark needs a JRE, Maven fetches the jars Spark loads (jvm/spark/pom.xml);
# Node builds the UI's front-end libraries.
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jdk-headless maven nodejs npm \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY requirements.txt .
RUN pip install --no-cache-dir -r requirements.txt
COPY package.json package-lock.json ./
COPY static ./static
RUN npm ci --ignore-scripts --no-audit --no-fund && npm run vendor && rm -rf node_modules
COPY . .
RUN scripts/resolve-jars spark
ENV DJANGO_SETTINGS_MODULE=sinkadmin.settings PYTHONUNBUFFERED=1
EXPOSE 8000
