# The Lahar image: one image, three programs (`lahar agent`, `lahar scheduler`, `lahar controller`),
# chosen by the container's args (deploy/).
#
#   docker build -t lahar:0.1.0 .
#
# It runs as an unprivileged user by default; the agent's DaemonSet runs it as root because the
# QoS engine writes the host's cgroup files (deploy/daemonset/daemonset.yaml).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
# What `pip install .` reads: the packaging files and the program folders (setup.py maps
# agent/, scheduler/, controller/, apiserver/, node/ and up/ under lahar.*).
COPY pyproject.toml setup.py README.md ./
COPY lahar/ lahar/
COPY agent/ agent/
COPY scheduler/ scheduler/
COPY controller/ controller/
COPY apiserver/ apiserver/
COPY node/ node/
COPY up/ up/
RUN pip install . && rm -rf /src

WORKDIR /
USER 65532:65532
ENTRYPOINT ["lahar"]
CMD ["--help"]
