module github.com/kcm-split/kcm-split/deploy/tests/chart/dashboards

go 1.26.0

require github.com/grafana/grafana-foundation-sdk/go v0.0.22
