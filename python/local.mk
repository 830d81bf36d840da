# python/local.mk
