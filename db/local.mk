# db/local.mk
