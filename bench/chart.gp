# Charts of a bench/compare run: gnuplot -e "dir='OUT'" bench/chart.gp
# Reads OUT/chart_main.dat and OUT/chart_scale.dat (bench/summarize.py);
# writes OUT/chart.png (throughput and p99 per system) and OUT/scale.png.
# main_chart=0 or scale_chart=0 skips one (bench/compare sets them).
if (!exists("dir")) dir = "."
if (!exists("main_chart")) main_chart = 1
if (!exists("scale_chart")) scale_chart = 1
if (main_chart) {
set terminal pngcairo size 1400,900 font "sans,10" noenhanced
set output dir."/chart.png"
set multiplot layout 2,1 title "dedupd vs Redis vs PostgreSQL (medians; 64 callers)"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set grid ytics
set key outside right top vertical
set bmargin 4
set logscale y
set ylabel "claims/s (log)"
set title "Throughput"
plot dir."/chart_main.dat" using 2:xtic(1) title "unique keys, 1 per call", \
     "" using 4 title "batches of 64"
set ylabel "p99 latency, us (log)"
set title "p99 latency"
plot dir."/chart_main.dat" using 3:xtic(1) title "unique keys, 1 per call", \
     "" using 5 title "batches of 64"
unset multiplot
}

if (scale_chart) {
  set output dir."/scale.png"
  set terminal pngcairo size 1000,600 font "sans,10" noenhanced
  unset logscale y
  set style data linespoints
  set logscale x
  set xlabel "records retained (log)"
  set ylabel "claims/s"
  set y2label "p99 us"
  set y2tics
  set yrange [0:*]
  set y2range [0:*]
  set title "dedupd buffered, 64 callers: throughput and p99 as records grow"
  plot dir."/chart_scale.dat" using 1:2 axes x1y1 title "claims/s" lw 2, \
       "" using 1:3 axes x1y2 title "p99 us" lw 2
}
