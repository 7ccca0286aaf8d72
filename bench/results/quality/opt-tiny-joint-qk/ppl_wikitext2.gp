set terminal pngcairo size 800,560 noenhanced
set output '/tmp/opt-abl-qk/ppl_wikitext2.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (wikitext2)'
set title 'opt-tiny'
plot 1273.219460433455 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'latentllm'
60 1287.6885448965152
e
