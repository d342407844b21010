module github.com/kcm-split/kcm-split/services/pvbinder

go 1.26.0

replace github.com/kcm-split/kcm-split/shared => ../../shared
