# gen/local.mk
