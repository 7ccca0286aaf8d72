set terminal pngcairo size 800,560 noenhanced
set output 'bench/results/rope_window/stories260K-w0/ppl_wikitext2.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (wikitext2)'
set title 'stories260K'
plot 122.33439962946689 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'latentllm'
20 116.64920120467227
40 130.8293833216505
e
