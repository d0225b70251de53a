# client/java/java.mk -- the Java client of dlockd (package dlockd, Java 17,
# standard library only), included by the top Makefile; it also works on its
# own from the top of the tree:  make -f client/java/java.mk O=build/x javatest
#
#   make java       compile to $(O)/java/classes and make $(O)/java/dlockd.jar
#   make javatest   compile the tests and run them (JUnit 5, Debian's junit5)
#                   against this build's dlockd (DLOCKD), redis-server and
#                   openssl; a missing daemon fails the run, never skips it
#   make javatest-parts  the conformance scenarios, each on a partitioned
#                   service (DL_CONFORMANCE_PARTS=1)

O          ?= build
JAVAC      ?= javac
JAR        ?= jar
JAVA       ?= java
JUNIT_JAR  ?= /usr/share/java/junit-platform-console-standalone.jar
JAVA_DIR   = client/java
JAVA_OUT   = $(O)/java
JAVAC_FLAGS ?= --release 17 -Xlint:all -Werror -encoding UTF-8

JAVA_SRC      = $(wildcard $(JAVA_DIR)/src/main/java/dlockd/*.java)
JAVA_TEST_SRC = $(wildcard $(JAVA_DIR)/src/test/java/dlockd/*.java)

.PHONY: java javatest javatest-parts

java: $(JAVA_OUT)/dlockd.jar

$(JAVA_OUT)/classes.stamp: $(JAVA_SRC)
	rm -rf $(JAVA_OUT)/classes
	mkdir -p $(JAVA_OUT)/classes
	$(JAVAC) $(JAVAC_FLAGS) -d $(JAVA_OUT)/classes $(JAVA_SRC)
	touch $@

$(JAVA_OUT)/dlockd.jar: $(JAVA_OUT)/classes.stamp
	$(JAR) --create --file $@ -C $(JAVA_OUT)/classes .

$(JAVA_OUT)/test-classes.stamp: $(JAVA_OUT)/classes.stamp $(JAVA_TEST_SRC)
	rm -rf $(JAVA_OUT)/test-classes
	mkdir -p $(JAVA_OUT)/test-classes
	$(JAVAC) $(JAVAC_FLAGS) -cp $(JAVA_OUT)/classes:$(JUNIT_JAR) -d $(JAVA_OUT)/test-classes $(JAVA_TEST_SRC)
	touch $@

# Test classes run in parallel (each starts its own daemons on free ports);
# the tests of one class one after the other.
javatest: $(O)/dlockd $(JAVA_OUT)/dlockd.jar $(JAVA_OUT)/test-classes.stamp
	DLOCKD=$(abspath $(O)/dlockd) $(JAVA) -jar $(JUNIT_JAR) \
	  --class-path $(JAVA_OUT)/classes:$(JAVA_OUT)/test-classes \
	  --scan-class-path $(JAVA_OUT)/test-classes \
	  --disable-banner --details=tree --fail-if-no-tests \
	  --config junit.jupiter.execution.parallel.enabled=true \
	  --config junit.jupiter.execution.parallel.mode.default=same_thread \
	  --config junit.jupiter.execution.parallel.mode.classes.default=concurrent \
	  --config junit.jupiter.execution.parallel.config.strategy=fixed \
	  --config junit.jupiter.execution.parallel.config.fixed.parallelism=4

# The conformance scenarios on a partitioned service (22 s, three at a
# time): the Java runner's DL_CONFORMANCE_PARTS=1 (make conformance-parts).
javatest-parts: $(O)/dlockd $(JAVA_OUT)/dlockd.jar $(JAVA_OUT)/test-classes.stamp
	DLOCKD=$(abspath $(O)/dlockd) DL_CONFORMANCE_PARTS=1 $(JAVA) -jar $(JUNIT_JAR) \
	  --class-path $(JAVA_OUT)/classes:$(JAVA_OUT)/test-classes \
	  --select-class dlockd.ConformanceTest \
	  --disable-banner --details=tree --fail-if-no-tests
