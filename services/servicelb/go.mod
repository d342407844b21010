module github.com/kcm-split/kcm-split/services/servicelb

go 1.26.0

replace github.com/kcm-split/kcm-split/shared => ../../shared
